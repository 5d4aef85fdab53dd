"""sysfs"""
