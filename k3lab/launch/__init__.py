"""Launch side (``k3lab.launch``): how nodes are reached (targets: sim, lab, the lab emulator), how a
rendered plan is brought up stage by stage behind readiness gates and torn down, and the simulator
image the sim target runs (``sim/``)."""
