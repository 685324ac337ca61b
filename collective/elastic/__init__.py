"""Elastic training, framework-neutral: state that commits and restores, the ``run`` wrapper that re-forms
the job after a lost or added worker, and the worker's side of the elastic launcher's rounds.

Scripts use the framework modules, in Horovod's names: ``collective.torch.elastic``,
``collective.tensorflow.elastic`` and ``collective.keras.elastic``. This package imports no framework.
"""
