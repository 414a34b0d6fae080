"""Energy: the power model of node types, the power-saving policies and the demand forecast."""
