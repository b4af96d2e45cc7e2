"""trnwatch: terminal monitor for training runs on AWS Trainium3 UltraServers."""

__version__ = "0.1.0"
