"""Advice from run folders, torch-free (a notebook or a machine without torch can use it): a run folder
read into a typed record (``record``), the spread predicted from the inputs measured in it (``predict``),
forecast to the run's end or to an unrun setting (``forecast``), the loss the spread costs (``gap``) and
the tuner from pilot runs (``tune``). docs/advice.md states the recipes and where they hold."""
