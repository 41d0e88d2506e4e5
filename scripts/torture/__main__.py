"""`python -m scripts.torture`: the storm, the finish and the check (or one worker, `_worker`)."""

import sys

from scripts.torture.cli import main

sys.exit(main())
