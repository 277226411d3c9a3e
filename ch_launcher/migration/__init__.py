"""Live migration's I/O below the manager: the relay that carries a Cloud Hypervisor migration
stream between a VMM and virt-handler's migration proxy (`relay.py`). Imported only by a launcher
that migrates (through `ch_launcher.manager.migration_source` and `migration_target`)."""
