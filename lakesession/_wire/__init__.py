"""Rules both halves follow on the wire, written once.

The client (``lakesession`` minus ``reference/``) and the catalog server (``lakesession.reference``) never
import each other; this package is the only client code the server imports. It holds no policy and
no heavy dependency (stdlib, plus sqlglot for view SQL, joserfc and httpx for tokens: dependencies of
every distribution), so ``lakesession-core`` ships it, with the package's ``__init__`` and ``errors``, to the
catalog server and the client alike (``tools/distributions.py``):

* ``cloudkeys``: the Iceberg REST storage-credential property names of S3, ADLS and GCS;
* ``referenced_by``: the ``referenced-by`` query parameter's codec and the namespace separator;
* ``viewsql``: which tables and views a view's SQL reads, resolved against its defaults;
* ``redact``: botocore's DEBUG records without credentials;
* ``singleflight``: concurrent calls for one key share one execution;
* ``sockets``: listening sockets bound before their server starts;
* ``enginerules``: the trusted engine's rulebook (``engine_rules.json``, also in the JVM jar and the docs) and
  the names both halves share with it: view-chain catalogs, the refusal's text, the SQL signature trailer;
* ``jwks``: JWT access-token checks and an OIDC discovery + JWKS verifier (the catalog's for an external
  issuer, a trusted engine's for its users' tokens).
"""
