"""The result service: reads executions' results, statistics and logs back."""
