"""cm/cpumanager"""
