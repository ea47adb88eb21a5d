"""The paper's data sizes, without torch (grids and the ledger read them).

The paper's data (section 3): length 16; 5,000 strings for parity and mod-3, 10,000
parentheses strings balanced 50/50; i.i.d. samples split 80/20 at random.
"""

PAPER_LENGTH = 16
PAPER_N = {"parity": 5000, "mod3": 5000, "dyck1": 10000}
