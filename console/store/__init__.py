"""What this console keeps of its runs, on its own disk and in memory; nothing here reaches a host (Qt-free).

``manifests``: run ids and each run's manifest. ``metrics``: a run's live metrics store, made of its parts:
``curves`` (``table``'s tables, ``metric_ids``' names), ``system`` (the hosts' samples), ``tasks`` (each task's
progress), ``journal`` (events and epochs) and ``marks`` (supervision's states, markers). ``snapshot``: the
store as kept when a session ends. ``cache``: what a session received of its run, appended to this console's
state folder, and read back.
"""
