"""Where and how an execution's tables are laid out in a warehouse: shared by writer and readers."""
