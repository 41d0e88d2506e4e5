"""Armed only in a partitions round (scripts/partitions puts this folder first on a writer's PYTHONPATH): in
the driver of a Spark job, `stitchlake/spark/submit.py` run by spark-submit, it arms the round's fault point as
`python -m scripts.partitions hooked` does in `stitch`, the launcher. The driver runs the job's commit and
publishes it (a compaction's heartbeat too), so a Spark job stops there as an in-process one does. Any other
process is left alone."""

import os
import sys

if os.environ.get("STITCH_PARTITIONS_POINT") and sys.argv[0].endswith(os.path.join("stitchlake", "spark", "submit.py")):
    from scripts.partitions.hook import install_hook
    from scripts.partitions.settings import POINT_ENV, SIGNAL_DIR_ENV

    install_hook(os.environ[POINT_ENV], os.environ[SIGNAL_DIR_ENV])
