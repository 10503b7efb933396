"""``enverif dev`` and the embedded defaults: the stack that runs the API and a worker in one
process (``stack``), the demo workspace (``demo``), the routes the demo agents talk to
(``routes``), and the embedded Redis that unset ``ENVERIF_REDIS_URL`` means (``embedded``).
"""
