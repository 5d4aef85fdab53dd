"""Plugin configuration: a YAML file with KubeletConfiguration-style keys."""

from nri_cpumgr.config.model import Config, ConfigError, load_config, parse_config

__all__ = ["Config", "ConfigError", "load_config", "parse_config"]
