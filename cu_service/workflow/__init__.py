"""Workflows: static checks, and compilation to Spark DataFrames."""
