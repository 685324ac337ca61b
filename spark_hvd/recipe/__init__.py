"""Rank child: the rank recipe that every estimator's ranks run (rank_recipe.py), the hooks a framework
supplies (hooks.py), and the plan the driver sends (plan.py). Imports neither pyspark nor a framework."""
