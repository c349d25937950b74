"""Runs: recipes, launching into tmux, listing run records, following their files."""
