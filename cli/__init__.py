"""The user and admin commands. Fast path: the standard library only until a reply is printed."""
