"""Stand-in for MemCache (memcache_hybrid): MetaService, its REST API and the object-store client.

The ``memcache_hybrid`` package on the sim site re-exports the public names from here. Clients
reach the MetaService over plain TCP (see ``wire``): the meta service URL carries object and
segment requests, the config store URL carries BM rank joins.
"""
