"""Topology-aware scheduling: the domain tree, a podSet's topology request, placement, the nodes it reads, and admission that needs quota and placement both."""
