"""A tiny Flask app using wurk: a view pushes a job, a worker runs it in the app context.

Run it: ``flask --app flask_shop run`` and ``flask --app flask_shop wurk worker``.
"""

from __future__ import annotations

import os
from pathlib import Path

from flask import Flask, current_app, jsonify, request, session

import wurk
from wurk.contrib.flask import Wurk

wurk_ext = Wurk(dashboard="/admin/wurk", authorize=lambda: session.get("admin") is True)


@wurk.job(name="FlaskShop::Welcome")
def send_welcome(email: str) -> None:
    # current_app works: the worker runs each job inside the app's context.
    with Path(current_app.config["OUTBOX"]).open("a") as outbox:
        outbox.write(f"welcome {email}\n")


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.from_mapping(
        SECRET_KEY="example-only",
        OUTBOX=os.environ.get("FLASK_SHOP_OUTBOX", "outbox.txt"),
        WURK_CONCURRENCY=2,
        WURK_FETCH_TIMEOUT=0.2,
        WURK_HEARTBEAT_INTERVAL=1,
    )
    wurk_ext.init_app(app)

    @app.post("/signup")
    def signup() -> object:
        jid = send_welcome.perform_async(request.form["email"])
        return jsonify(jid=jid)

    @app.post("/login")
    def login() -> object:
        session["admin"] = request.form.get("admin") == "yes"
        return jsonify(admin=session["admin"])

    return app
