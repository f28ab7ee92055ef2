"""The wire: what a command, an agent and schedd say to each other, and how.

``protocol`` is the versioned envelope and its checks, ``operations`` the allow-list of every
operation a client may send (each field named, typed and bounded), ``wirejson`` the JSON codec,
``localsock`` the local Unix socket with its peer credentials and streamed replies.
"""
