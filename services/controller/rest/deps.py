"""Dependencies shared by every REST router: the controller's state, reached through the app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from services.controller.main import Controller


def controller(request: Request) -> Controller:
    return request.app.state.controller
