"""Request handlers: one module per group of ops, each a leaf (no handler imports another).

What several handlers need lives beside them but is no handler: ``admission`` (checking a job
as submitted or updated) and ``selection`` (which jobs an id list or filter names). The table
of op -> handler is ``schedd.routes``; the types a handler uses are ``schedd.context``'s.
"""
