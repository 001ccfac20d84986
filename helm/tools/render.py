#!/usr/bin/env python3
"""Renders a Helm chart offline, like `helm template`, with Helm itself.

No `helm` binary is needed: the PyPI package `helm-python-sdk` bundles Helm's
Go SDK (v4) as a shared library, so this is Helm's own template engine and
values.schema.json validation, not an imitation. Nothing contacts a cluster.

    python3 helm/tools/render.py helm/mneme -f my-values.yaml [-f more.yaml]
        [--release NAME] [--namespace NS] [--upgrade] [--lint]

Prints the manifests as one YAML stream (`---` between documents, each
preceded by `# Source: <template>`), hooks included, NOTES.txt left out.
A values file that breaks values.schema.json, a failing `required`/`fail`
or a template error exits with status 1 and Helm's message on stderr.
With --lint, runs `helm lint --strict` on the chart with the same values
instead and prints its findings; any finding fails.

deploy/local/setup.sh (MNEME_INSTALL_TEST_TOOLS=1) installs the package into
$MNEME_TEST_HELM_TOOLS; put that directory on PYTHONPATH.
"""

import argparse
import sys


def deep_merge(base, override):
    """Merges values files the way Helm does: maps recursively, the rest replaced."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chart", help="chart directory")
    parser.add_argument("-f", "--values", action="append", default=[], help="values file (repeatable)")
    parser.add_argument("--release", default="mneme", help="release name (default: mneme)")
    parser.add_argument("--namespace", default="mneme", help="namespace (default: mneme)")
    parser.add_argument("--upgrade", action="store_true", help="render as an upgrade (.Release.IsUpgrade)")
    parser.add_argument("--lint", action="store_true", help="run helm lint --strict instead of rendering")
    parser.add_argument("--kube-version", default="v1.30.0", help="Kubernetes version for --lint")
    args = parser.parse_args()

    try:
        import helm_python as helm
    except ImportError as error:
        sys.exit(
            f"cannot import helm_python ({error}): install the PyPI package helm-python-sdk "
            "(MNEME_INSTALL_TEST_TOOLS=1 deploy/local/setup.sh) and put $MNEME_TEST_HELM_TOOLS on PYTHONPATH"
        )

    values = {}
    for path in args.values:
        with open(path, encoding="utf-8") as file:
            deep_merge(values, helm.values_from_yaml(file.read()) or {})

    if args.lint:
        report = helm.lint(args.chart, values, strict=True, namespace=args.namespace, kube_version=args.kube_version)
        findings = report.get("messages", []) + [{"severity": 3, "path": "", "error": e} for e in report.get("errors", [])]
        for finding in findings:
            print(f"[{finding['severity']}] {finding['path']}: {finding['error']}")
        # Severity 1 is informational ("icon is recommended"); 2+ are warnings and errors.
        return 1 if any(f["severity"] >= 2 for f in findings) else 0

    try:
        with helm.Chart.load(args.chart) as chart:
            manifests = chart.render(
                values,
                name=args.release,
                namespace=args.namespace,
                is_install=not args.upgrade,
                is_upgrade=args.upgrade,
            )
    except helm.HelmError as error:
        print(f"helm: {error}", file=sys.stderr)
        return 1

    out = []
    for source in sorted(manifests):
        if source.endswith("NOTES.txt"):
            continue
        text = manifests[source].strip("\n")
        # A template may hold several documents; keep each with its source.
        for document in text.split("\n---\n"):
            document = document.strip("\n")
            if document.startswith("---\n"):
                document = document[4:]
            if any(line.strip() and not line.lstrip().startswith("#") for line in document.splitlines()):
                out.append(f"---\n# Source: {source}\n{document}\n")
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
