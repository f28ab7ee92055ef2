"""Request handlers: one module per group of ops, each a leaf (no handler imports another).

What several handlers need lives beside them but is no handler: ``selection`` (which jobs an id
list or filter names); checking a job as submitted or updated is the lifecycle's
(``schedd/lifecycle/admission.py``). The table
of op -> handler is ``schedd.routes``; a handler is handed ``schedd.lifecycle.context.Context``.
"""
