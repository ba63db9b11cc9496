#!/usr/bin/python3
"""Checks OpenLineage RunEvent files that spank_saker.so wrote (provenance_openlineage.sh).

Usage: openlineage_check.py FILE...

Two checks:
  1. Saker's own structural check of what OpenLineage's RunEvent requires (written from
     the specification's semantics, not copied from it): eventType one of OpenLineage's,
     eventTime an RFC 3339 date-time, producer and schemaURL URIs, run.runId a UUID,
     job.namespace and job.name, datasets with namespace and name, every facet with
     _producer and _schemaURL, and a dataset's version facet with its datasetVersion.
  2. Saker's own facets (saker_slurm, saker_dataset, saker_checkpoint) against Saker's
     schema for them, provenance/openlineage-facets.json, with python3-jsonschema.
  3. When SAKER_OPENLINEAGE_SCHEMA names a copy of OpenLineage's published JSON schema
     (spec/OpenLineage.json of github.com/OpenLineage/OpenLineage; not kept in this tree),
     validation against it with Debian's python3-jsonschema, formats included. Otherwise
     it says that it was skipped.

Prints "ok FILE" or "invalid FILE: reason" per file, then "facets: ..." and "schema: ..."
lines, and exits 1 when any file is invalid.
"""
import json
import os
import re
import sys

EVENT_TYPES = {"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"}
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s]+$")


class Invalid(Exception):
    pass


def need(cond, why):
    if not cond:
        raise Invalid(why)


def text(obj, key, where):
    need(isinstance(obj, dict), f"{where} is not an object")
    need(isinstance(obj.get(key), str) and obj[key] != "", f"{where}.{key} is missing or not a non-empty string")
    return obj[key]


SEEN_FACETS = []  # (where, facet) of every facet, for the facet schema


def facets(obj, key, where):
    if key not in obj:
        return
    need(isinstance(obj[key], dict), f"{where}.{key} is not an object")
    for name, facet in obj[key].items():
        SEEN_FACETS.append((f"{where}.{key}.{name}", facet))
        need(not name.startswith("_"), f"{where}.{key}: facet name {name!r} starts with '_'")
        need(URI.match(text(facet, "_producer", f"{where}.{key}.{name}")), f"{where}.{key}.{name}._producer is not a URI")
        need(URI.match(text(facet, "_schemaURL", f"{where}.{key}.{name}")), f"{where}.{key}.{name}._schemaURL is not a URI")


def datasets(event, key, extra):
    if key not in event:
        return
    need(isinstance(event[key], list), f"{key} is not an array")
    for i, d in enumerate(event[key]):
        where = f"{key}[{i}]"
        text(d, "namespace", where)
        text(d, "name", where)
        facets(d, "facets", where)
        facets(d, extra, where)
        version = d.get("facets", {}).get("version")
        if version is not None:  # OpenLineage's DatasetVersionDatasetFacet: datasetVersion is required
            text(version, "datasetVersion", f"{where}.facets.version")


def structural(event):
    need(isinstance(event, dict), "the event is not a JSON object")
    if "eventType" in event:
        need(event["eventType"] in EVENT_TYPES, f"eventType {event['eventType']!r} is not one of {sorted(EVENT_TYPES)}")
    need(DATE_TIME.match(text(event, "eventTime", "event")), "eventTime is not an RFC 3339 date-time")
    need(URI.match(text(event, "producer", "event")), "producer is not a URI")
    need(URI.match(text(event, "schemaURL", "event")), "schemaURL is not a URI")
    run = event.get("run")
    need(UUID.match(text(run, "runId", "run")), "run.runId is not a lower-case UUID")
    facets(run, "facets", "run")
    job = event.get("job")
    text(job, "namespace", "job")
    text(job, "name", "job")
    facets(job, "facets", "job")
    datasets(event, "inputs", "inputFacets")
    datasets(event, "outputs", "outputFacets")


def schema_validator():
    path = os.environ.get("SAKER_OPENLINEAGE_SCHEMA", "")
    if not path:
        return None, "skipped: set SAKER_OPENLINEAGE_SCHEMA to a copy of OpenLineage's spec/OpenLineage.json"
    import jsonschema  # Debian's python3-jsonschema (scripts/install-deps)
    with open(path) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER if hasattr(cls, "FORMAT_CHECKER") else jsonschema.FormatChecker()), \
        f"validated against {path} ({schema.get('$id', 'no $id')})"


FACETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "provenance", "openlineage-facets.json")
MARK = "/provenance/openlineage-facets.json#/$defs/"


def saker_facets(counter):
    """Validates the Saker facets seen in this event against Saker's own schema."""
    try:
        import jsonschema
    except ImportError:
        return "skipped: no python3-jsonschema (scripts/install-deps)"
    with open(FACETS) as f:
        defs = json.load(f)["$defs"]
    for where, facet in SEEN_FACETS:
        url = facet.get("_schemaURL", "")
        if MARK not in url:
            continue
        name = url.split(MARK, 1)[1]
        need(name in defs, f"{where}: _schemaURL names {name}, which {FACETS} does not define")
        v = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs},
                                            format_checker=jsonschema.FormatChecker())
        errors = list(v.iter_errors(facet))
        need(not errors, f"{where}: " + "; ".join(e.message for e in errors[:3]))
        counter[0] += 1
    return None


def main(files):
    validator, how = schema_validator()
    bad = 0
    counter = [0]
    facets_how = None
    for path in files:
        try:
            with open(path) as f:
                event = json.load(f)
            SEEN_FACETS.clear()
            structural(event)
            facets_how = saker_facets(counter) or facets_how
            if validator is not None:
                errors = sorted(validator.iter_errors(event), key=lambda e: list(e.path))
                need(not errors, "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:3]))
            print(f"ok {path}")
        except (OSError, ValueError, Invalid) as e:
            bad += 1
            print(f"invalid {path}: {e}")
    print(f"facets: {facets_how or f'{counter[0]} Saker facets validated against provenance/openlineage-facets.json'}")
    print(f"schema: {how}")
    return 1 if bad or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
