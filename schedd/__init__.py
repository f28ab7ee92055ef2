"""schedd: kiln's controller — the event loop, the ledger, the pure scheduler core, the
handlers of every operation and a job's lifecycle. Nothing outside it imports it, bar the
schedd tools among the commands (``kiln db``, ``kiln up``, ``kiln sim``, ``kiln bench``) and the
simulator, which runs the same scheduler core (pyproject.toml's import contracts say so)."""
