"""What this console keeps of its runs, on its own disk and in memory; nothing here reaches a host (Qt-free).

``manifests``: run ids and each run's manifest. ``metrics``: a run's live metrics store, on ``table``'s
tables and ``metric_ids``' names. ``snapshot``: the store as kept when a session ends. ``cache``: what a
session received of its run, appended to this console's state folder, and read back.
"""
