"""The user and admin commands. Fast path: standard library + zmq only until a reply is printed."""
