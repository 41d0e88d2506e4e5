"""Armed only in a partitions round (scripts/partitions.py puts this folder first on a writer's PYTHONPATH): in
the driver of a Spark job, `stitchlake/spark/submit.py` run by spark-submit, it arms the round's fault point as
`partitions.py hooked` does in the CLI. The transaction (requested instant, heartbeat, completed instant) runs in
the driver, so a Spark job stops at those points as an in-process one does. Any other process is left alone."""

import os
import sys

if os.environ.get("STITCH_PARTITIONS_POINT") and sys.argv[0].endswith(os.path.join("stitchlake", "spark", "submit.py")):
    from scripts.partitions import POINT_ENV, SIGNAL_DIR_ENV, install_hook

    install_hook(os.environ[POINT_ENV], os.environ[SIGNAL_DIR_ENV])
