"""Horovod's ``horovod.spark.common`` import paths, so ported code only changes its package prefix."""
