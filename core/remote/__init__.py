"""Runs on other machines over plain ssh: start one detached on a host, follow its metrics, steer it (see
docs/remote.md).

    Host(dest, command="amp-console", ssh_options=())      how to reach a host and run amp-console
    host_devices(host) -> HostInfo                          its version, devices and runs root
    start_remote_run(host, config, ...) -> RemoteRun        a detached `amp-console train`; .folder on the host
    follow_remote(host, folder, offset) -> RemoteFollower   iterate: FollowLine (record, offset) / FollowNote
    control_remote(host, folder, verb) -> ControlResult     pause | resume | stop, acknowledged
    fetch.list_host_runs(host, local_root) -> HostRuns      the host's runs, as the history's rows
    fetch.fetch_run(host, folder, local_root) -> FetchedRun a run and its best checkpoint, copied here
"""
