import sys

from k3sim.vllm.main import main

sys.exit(main(sys.argv[1:]))
