"""The training engine: the Trainer and what one run is made of. Imports only core's lower layers."""
