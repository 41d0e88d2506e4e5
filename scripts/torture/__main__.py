"""`python -m scripts.torture`: the storm, the finish and the check (or one worker, `_worker`).

Both end as `stitch` ends (`end_process_after`): they run reads and writes in this process."""

import sys

if sys.argv[1:2] == ["_worker"]:  # restarted after every kill: only the actors, not the supervisor's oracle
    from stitchlake.cli import without_pandas

    without_pandas.refuse()  # a stitch writer, as the `stitch` command is (pyarrow would import pandas for nothing)
    from scripts.torture.actors import worker_main
    from stitchlake.cli.app import end_process_after

    end_process_after(lambda: worker_main(sys.argv[2:]))

from scripts.torture.cli import main
from stitchlake.cli.app import end_process_after

end_process_after(main)
