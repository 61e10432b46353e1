"""`sluice api`: send one raw request to sluiced's control API and print the response line."""

import json

from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, add_common, client_for, die, sub


def cmd_api(args):
    try:
        req = json.loads(args.request)
    except ValueError as e:
        return die(f"request is not JSON: {e}", EXIT_USAGE)
    if isinstance(req, str):
        req = {"cmd": req}
    if not isinstance(req, dict):
        return die("request must be a JSON object or a command name", EXIT_USAGE)
    with client_for(args) as c:
        resp = c.request(req)
        print(c.last_raw)
    return EXIT_OK if resp.get("ok") is True else EXIT_FAIL


def register(subs):
    s = sub(subs, "api", "send one raw request to the control API and print the response",
            "sluice api '{\"cmd\":\"ports\"}'\nsluice api '\"nfs\"'      # a bare command name works too")
    add_common(s)
    s.add_argument("request", metavar="JSON", help="request object, e.g. '{\"cmd\":\"chains\"}'")
    s.set_defaults(func=cmd_api)
