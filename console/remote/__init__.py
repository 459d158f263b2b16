"""Reaching a host: the ``Transport`` interface with its local and SSH implementations, the agent channel and
client, the content-addressed deploy, and the host link that connects, deploys and starts the agent."""
