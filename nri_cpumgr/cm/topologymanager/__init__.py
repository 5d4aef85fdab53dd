"""cm/topologymanager"""
