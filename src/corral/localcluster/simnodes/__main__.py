"""python -m corral.localcluster.simnodes: the node simulator as a process."""

from corral.localcluster.simnodes.process import main

main()
