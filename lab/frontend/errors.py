"""The one error the text frontend raises for text a voice cannot be asked to speak."""


class TextError(ValueError):
    """The input text is empty, too long, or has nothing a voice could pronounce.

    A subclass of ValueError because it is always the caller's input that is wrong, so a UI
    can show the message as it is and a batch run can skip the line and go on.
    """
