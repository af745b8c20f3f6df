"""How the flows present their runs in Prefect: run ids, names, tags and failure reports (``runs``), events
(``events``), artifacts (``report``, ``restore_report``, ``maintenance_report``, ``progress``) in one table style
(``tables``). No Prefect task is defined here: the tasks are in ``tasks/``, the flows in ``flows/``."""
