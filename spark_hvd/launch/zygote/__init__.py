"""Zygote: a spare rank child that has imported its modules and forks a fresh rank process per job (fork)."""
