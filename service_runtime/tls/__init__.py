"""Transport security: TLS for the mesh's gRPC servers and channels, with identities in
certificates.

- ``identity``: the SPIFFE IDs that name the mesh's services and units, and allow-lists of them;
- ``authority``: a certificate authority for development and tests, issuing those certificates;
- ``files``: writing certificate and key files so that a reader never sees half of one;
- ``server_credentials``: a server's credentials, reloaded when its certificate files change;
- ``mesh_client``: what a service trusts and presents when it calls the mesh, and its channels;
- ``peers``: the verified identity of a call's peer, and the interceptor that admits only the
  peers a server allows;
- ``caller_rules``: which service's certificate may call which service, with which tokens.
"""
