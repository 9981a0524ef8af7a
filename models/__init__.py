"""Example models, taken from the documents tsmigrate grew out of (see README, "Examples")."""
