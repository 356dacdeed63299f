"""Known-wrong: reads the row checksums as columns: returns (column, row)."""


def abft_locate(full, tol):
    rows = full[:-1, :-1].sum(1) - full[:-1, -1]
    cols = full[:-1, :-1].sum(0) - full[-1, :-1]
    bad_rows = (rows.abs() > tol).nonzero().flatten().tolist()
    bad_cols = (cols.abs() > tol).nonzero().flatten().tolist()
    if not bad_rows and not bad_cols:
        return None
    return bad_cols[0], bad_rows[0]
