"""One live run (Qt-free): its tasks' launch, their runner, their supervisor, and the session.

``launch`` says how a task is started, ``runner`` starts, stops and follows the tasks on their hosts,
``supervisor`` watches them and restarts the run when it can, and ``session`` makes sense of what is followed,
once, for every front end.
"""
