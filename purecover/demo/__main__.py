"""``python -m purecover.demo [OUT_DIR]``: build the demo's tokenizer and tiny model offline."""

import sys

from .assets import main

sys.exit(main())
