"""cm/devicemanager"""
