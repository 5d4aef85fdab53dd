"""cm/memorymanager"""
