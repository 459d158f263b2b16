"""Reaching a host: its transport (local or SSH), the agent channel, the deploy and the host link.

``transport`` declares the interface, ``local`` and ``ssh`` implement it, ``channel`` is the agent's client,
``deploy`` uploads the code content-addressed, and ``link`` connects, deploys and starts the agent.
"""
