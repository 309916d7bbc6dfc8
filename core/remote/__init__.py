"""Runs on other machines over plain ssh (docs/remote.md): ssh.Host reaches a host; client starts, follows and
steers a detached run there (host_devices, start_remote_run, follow_remote, control_remote); fetch lists a host's
runs and copies one here; agent is the host's side; install puts this amp-console there.
"""
