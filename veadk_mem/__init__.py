"""veadk-mem: the command-line memory administration tool for VeADK / Google ADK agents."""

__version__ = "0.1.0"
