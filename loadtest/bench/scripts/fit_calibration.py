#!/usr/bin/env python3
"""Fits the logistic calibration of surfacing relevance for one embedding model.

Input: the `--candidates` file of `mneme-bench surfacing`, run with
`--setting MNEME_SURFACING_MIN_SCORE=0 --setting MNEME_SURFACING_MAX_RESULTS=10`
(every query's ten best candidates, each with its cosine similarity, lexical
share and judgement). Output: the parameters of

    relevance = sigmoid(bias + w_similarity * similarity + w_lexical * lexical
                        + w_similarity_margin * similarity_margin
                        + w_lexical_margin * lexical_margin)

fitted by maximum likelihood (Newton's method, a little L2), plus 2-fold
cross-validated log loss and the precision of candidates above 0.5, with the
folds split by query so no query's candidates are in both.

Usage: fit_calibration.py candidates.json
"""

import json
import math
import sys


NAMES = ["bias", "w_similarity", "w_lexical", "w_similarity_margin", "w_lexical_margin"]


def features(c):
    if c["similarity"] is None:
        return None
    return [1.0, c["similarity"], c["lexical"], c["similarity_margin"], c["lexical_margin"]]


def fit(rows, l2=1e-3, iterations=50):
    # rows: (x: list[float], y: 0/1)
    n = len(rows[0][0])
    w = [0.0] * n
    for _ in range(iterations):
        grad = [0.0] * n
        hess = [[0.0] * n for _ in range(n)]
        for x, y in rows:
            p = 1 / (1 + math.exp(-sum(wi * xi for wi, xi in zip(w, x))))
            for i in range(n):
                grad[i] += (p - y) * x[i]
                for j in range(n):
                    hess[i][j] += p * (1 - p) * x[i] * x[j]
        for i in range(1, n):
            grad[i] += l2 * w[i]
            hess[i][i] += l2
        step = solve(hess, grad)
        w = [wi - si for wi, si in zip(w, step)]
        if max(abs(s) for s in step) < 1e-9:
            break
    return w


def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[col][col] != 0:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] if m[i][i] else 0.0 for i in range(n)]


def predict(w, x):
    return 1 / (1 + math.exp(-sum(wi * xi for wi, xi in zip(w, x))))


def main():
    candidates = json.load(open(sys.argv[1]))
    rows = []
    for c in candidates:
        x = features(c)
        if x is None:
            continue
        rows.append((c["query"], x, 1 if c["grade"] > 0 else 0))
    print(f"{len(rows)} candidates, {sum(r[2] for r in rows)} relevant")
    w = fit([(x, y) for _, x, y in rows])
    print(" ".join(f"{n}={v:.3f}" for n, v in zip(NAMES, w)))
    queries = sorted({q for q, _, _ in rows})
    for fold in (0, 1):
        test_q = set(queries[fold::2])
        train = [(x, y) for q, x, y in rows if q not in test_q]
        test = [(x, y) for q, x, y in rows if q in test_q]
        wf = fit(train)
        loss = -sum(
            math.log(max(1e-9, predict(wf, x) if y else 1 - predict(wf, x))) for x, y in test
        ) / len(test)
        tested = {q for q, _, _ in rows if q in test_q}
        report = []
        for threshold in (0.5, 0.6, 0.7):
            above = [(q, y) for q, x, y in rows if q in test_q and predict(wf, x) >= threshold]
            precision = sum(y for _, y in above) / len(above) if above else float("nan")
            coverage = len({q for q, _ in above}) / len(tested)
            report.append(f"≥{threshold}: coverage {coverage:.2f} precision {precision:.3f}")
        print(f"fold {fold}: log loss {loss:.3f}; " + "; ".join(report))


if __name__ == "__main__":
    main()
