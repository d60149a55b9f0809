"""Stand-in for MemFabric (memfabric_hybrid): only its package layout, which runtime_env.sh reads.

The BM layer it provides for real is simulated inside ``k3sim.memcache``.
"""
