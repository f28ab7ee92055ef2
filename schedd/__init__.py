"""schedd: kiln's controller. This package's ``__init__``, ``protocol``, ``config``, ``model`` and
``hostlist`` import only the standard library (and zmq): the CLI and the agent import them."""
