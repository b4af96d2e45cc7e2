import sys

from trnwatch.cli import main

sys.exit(main())
