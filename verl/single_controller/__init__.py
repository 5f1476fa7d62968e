"""verl's single controller: one driver process that calls methods on groups of workers.

``base`` holds the backend-independent pieces (``Worker``, ``@register``/``Dispatch``, ``WorkerGroup``); ``ray`` the
Ray backend (``RayResourcePool``, ``RayClassWithInitArgs``, ``RayWorkerGroup``). Import the Ray parts from
``verl.single_controller.ray`` so that importing ``base`` does not need Ray.
"""
