"""One live run (Qt-free): where its tasks run, its runner, its supervisor, and the session.

``launch`` says how a task is started; ``placement`` is where the tasks run (hosts of one's own, or a Slurm job),
chosen once from the cluster; ``runner`` deploys, hands the start and the stop to the placement and follows the
tasks; ``supervisor`` watches them (``watchdogs``), judges a failure (``judging``), restarts the run when it can
and changes an elastic run's size (``elastic``), its state one ``console.states.Supervision``; and ``session``
makes sense of what is followed, once, for every front end (``breakdowns``: why it is slow).
"""
